"""`attndeploy quickstart`: the whole pipeline on a built-in task, with one readable report."""
