"""Runners other than the built-in trainer that run inside the trainer image (`runner=hf`).
Each imports its heavy dependencies only inside its own package, so the default trainer path
never needs them."""
