"""Apps the tests load the way an operator would, with `--app` from the tests' folder
(support.paths.TESTS) as the working directory."""

SAMPLE_APP = "support.apps.sample:registry"
OPERATOR_APP = "support.apps.operator_jobs:registry"
CATALOGUE_APP = "support.apps.catalogue_jobs:registry"
CATALOGUE_CHANGED_APP = "support.apps.catalogue_jobs:changed"
LIMITED_APP = "support.apps.limited:registry"
MANIFEST_APP = "support.apps.manifest_jobs:registry"
EXPORT_APP = "support.apps.export_jobs:registry"
BACKFILL_APP = "support.apps.backfill_jobs:registry"
CHILDREN_APP = "support.apps.children_jobs:registry"
