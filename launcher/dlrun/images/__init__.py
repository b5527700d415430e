"""Reference images: pinned specs (containers/<tag>/image.yaml) rendered into Dockerfiles and Singularity
definitions per architecture, and built, pulled, pushed, saved, loaded and verified by engines
(dlrun.images.engines) against the site's lock of content digests ($DLRUN_HOME/images.lock).

Heavy dependencies (hpccm, spython, docker) are imported inside the functions that need them.
"""
