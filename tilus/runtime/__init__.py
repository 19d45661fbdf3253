"""The thin runtime between generated CUDA C++ and the GPU: compile, cache, load, launch."""
