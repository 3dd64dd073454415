"""The kubernetes backend's home: the backend (`backend`), the job kinds it submits
(`manifests` for the PyTorchJob and the pod pieces both kinds share, `trainjob`), the renderers
(`runtimes`, `network_policy`, `data_prepare`), the schema checks (`manifest_checks`) and the
cluster client (`client`, which never imports a backend). Nothing is imported here: choosing
another backend, or rendering runtimes in `pulumi up`, loads none of the rest."""
