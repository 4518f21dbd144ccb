"""simaccel's tools, built on the backend: the `simaccel` command line (cli), the demo, the
GPU benchmark (bench, artifacts), deployment helpers (deploy), example models (models),
the differential fuzzer (the fuzz package) and the pytest plugin for users' tests (testing,
pytest_plugin: `simaccel.testing`)."""
