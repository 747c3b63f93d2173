"""Helpers the test folders share: paths, row readers, test inputs, a declaration factory,
and the apps the process tests load with `--app support.apps.<module>:registry`."""
