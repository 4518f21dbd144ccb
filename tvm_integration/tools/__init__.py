"""simaccel's tools, built on the backend: the `simaccel` command line (cli), the demo, the
GPU benchmark (bench, artifacts), deployment helpers (deploy), example models (models) and
the differential fuzzer (fuzz, fuzz_models)."""
