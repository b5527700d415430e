"""Reference images: pinned specs (containers/<tag>/image.yaml) rendered into Dockerfiles and Singularity
definitions per architecture, and built, pulled, pushed, saved, loaded and verified against a lock of
content digests (containers/images.lock).

Heavy dependencies (hpccm, spython, docker) are imported inside the functions that need them.
"""
