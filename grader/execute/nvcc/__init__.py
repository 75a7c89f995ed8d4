"""The CUDA compiler's side: compiling a module as SourceModule does, the compile cache and its keys,
the parent's builds ahead of a GPU child, and reading a compiled module (its kernel's parameters,
mangled names, resources)."""
