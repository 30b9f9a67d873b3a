"""The user-facing frontend: lazy Tensor (with its mixins mathops, movement, indexing and the shape
rules in shapes), autograd, nn, optim, functional, random, control flow."""
