"""Where steps run: MPI, placement of ranks, launching in containers, images, registries, site checks."""
