"""Native regions: a CUDA build's regions as C++ that launches AOT-compiled kernels.

`source` writes a library's regions as C++ tables over `region.h` (the run-time half: tensor
checks, TVM's stream, the CUDA driver opened at run time); `build` compiles that to an
object TVM links into the model's library.
"""
