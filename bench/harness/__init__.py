"""The benchmark harness: durajobs and its peers, one throwaway Postgres, one run."""
