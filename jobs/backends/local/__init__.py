"""The local backend's home: the backend (`backend`) and the supervisor process it starts per
run (`supervisor`, `python -m jobs.backends.local.supervisor`). Nothing is imported here."""
