"""Models and the folders an instance mounts, on a node: staging from OSS / OBS / S3
(`storage`) and from Hugging Face and ModelScope (`hub`, `hub_modelscope`) into the node cache,
the hub models a node holds and their pruning (`hub_cache`), the commits a version is served at
(`hub_pins`), what an instance needs staged before it starts (`provisioning`), LoRA adapters
(`adapters`), the storage folders beside the model (`storage_mounts`: `git_mounts`,
`image_mounts`, `writable_storage`), and the staging a Kubernetes pod's init container runs
(`stage`)."""
