"""Model families as data: the architecture dataclass (`arch`), each family's Hugging Face
identity, tensor names, traits and named sizes (`families`), and a config's `model` section
turned into sizes (`args`). The trainer builds its torch modules from these
(`trainer.model.model`); the launcher plans and validates with them, without torch."""
