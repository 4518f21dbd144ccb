"""simaccel's BYOC backend for TVM Relax: the parts a user's build and a deployed library use.

autoload (registration on `import tvm`) -> patterns (Relax patterns derived from the ISA) ->
partition (regions, the report) -> codegen (regions to Programs) -> forwarder (the region
functions in TVM's library) -> bridge (TVM's tensors and stream to the runtime); pipeline
ties them into `build`. Nothing here imports the tools.
"""
