"""The user-facing frontend: lazy Tensor, autograd, nn, optim, functional, random, control flow."""
