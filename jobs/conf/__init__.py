"""The shipped Hydra config tree (package data), found through the `trainstack` search-path
plugin (hydra_plugins/trainstack_searchpath) as `pkg://jobs.conf`."""
