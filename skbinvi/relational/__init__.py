"""The latent feature relational model (METHODS.md section 1); kernels so far."""
