"""Hydra sweeper `hydra/sweeper=trainstack` (the default of `trainstack launch -m`): the basic
sweeper's grid, handed to the launcher in one batch, which validates every point."""
