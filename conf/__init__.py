"""The shipped Hydra config tree (package data in the wheel), found through the `trainstack`
search-path plugin (hydra_plugins/trainstack_searchpath) as `pkg://conf`."""
