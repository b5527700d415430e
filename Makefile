# dlrun: `make demo` runs the main job on this machine; `make test` runs the whole test suite; `make check`
# its fast tier.
# Both do all the set-up themselves (virtual environment, Python packages, Debian packages for tests).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV ?= .venv
# Absolute: tools that change directory (pip inside Horovod's setup_requires runs in the unpacked sdist) get it.
VENV_ABS := $(abspath $(VENV))
BIN := $(VENV)/bin
# torch is pinned everywhere: a range that admits a newer release pulls several GB of CUDA wheels.
TORCH_PIN := torch==2.13.0
EXTRAS := torch,tf,test,images,bench,export,report,data,docs,check,postgresql
# Debian packages the tests use: real MPI, a real Slurm cluster, real container runtimes (the Docker engine, whose
# daemon the tests start privately), an image registry and skopeo, PostgreSQL (a server the tests start privately), linters, ssh-keygen, fio, a headless browser
# (and its font) that opens the reports. (Apptainer comes from Debian sid, in a root of its own that the tests
# make: tests/apptainer/.)
APT_PACKAGES := qemu-user-static binfmt-support openmpi-bin libopenmpi-dev slurm-wlm munge charliecloud podman runc debootstrap shellcheck fio \
	libtcmalloc-minimal4 libjemalloc2 squashfs-tools openssh-client chromium fonts-dejavu-core cmake g++ \
	docker.io docker-registry skopeo openssl postgresql
# Horovod is built from its source release against the venv's torch (and TensorFlow when installed), cached
# under $XDG_CACHE_HOME/dlrun/wheels: minutes the first time, seconds after (scripts/build-horovod.sh).
HOROVOD_VERSION := 0.28.1

.PHONY: all setup sysdeps horovod demo sample-data test check bench gpu-wheels lint docs clean

all: test

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/activate
	echo '$(TORCH_PIN)' > $(VENV_ABS)/constraints.txt
	$(BIN)/pip install -q --disable-pip-version-check '$(TORCH_PIN)' numpy
	$(BIN)/pip install -q --disable-pip-version-check -c $(VENV_ABS)/constraints.txt -e '.[$(EXTRAS)]'
	touch $@

setup: $(VENV)/.installed

# Installs missing Debian packages when it can (root + apt-get); otherwise says exactly what to install.
# No service starts: docker.io, docker-registry and postgresql would start their daemons from their install scripts, so a
# policy-rc.d that denies it is in place during the install (and removed after, unless it was there before).
sysdeps:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' "$$p" 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian packages:$$missing"; \
	    policy=/usr/sbin/policy-rc.d; own=""; \
	    if [ ! -e "$$policy" ]; then printf '#!/bin/sh\nexit 101\n' > "$$policy"; chmod 755 "$$policy"; own=1; fi; \
	    trap '[ -z "$$own" ] || rm -f "$$policy"' EXIT; \
	    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing >/dev/null; \
	  else \
	    echo "missing Debian packages:$$missing"; \
	    echo "install them with: sudo apt-get install -y$$missing"; exit 1; \
	  fi; \
	fi

# After setup (the extras, TensorFlow among them) and sysdeps (cmake, g++, libopenmpi-dev).
horovod: setup sysdeps
	HOROVOD_VERSION=$(HOROVOD_VERSION) PIP_CONSTRAINT=$(VENV_ABS)/constraints.txt scripts/build-horovod.sh $(VENV_ABS)/bin/python

# The demo wants only tcmalloc (the harness's allocator; without it the harness falls back to glibc-tuned).
demo: setup
	-@$(MAKE) --no-print-directory sysdeps APT_PACKAGES=libtcmalloc-minimal4
	$(BIN)/dlrun run resnet50
	$(BIN)/dlrun results import samples/sample-localhost.bundle --allowed-signers samples/allowed_signers

# The sample data (samples/README.md): real runs of one small machine, site sample-data.invalid, to learn
# compare, report and check on before any run of one's own.
sample-data: setup
	$(BIN)/dlrun results import samples/sample-localhost.bundle --allowed-signers samples/allowed_signers

# Two workers (pytest-xdist): the tests that build images, start container engines or the Slurm cluster run in
# one worker each (their session fixtures are made once: tests/conftest.py), everything else is spread over both.
# DLRUN_PREBUILD_FOREIGN starts the emulated ppc64le image build with the session (tests/fixtures_images.py).
# The 40 slowest tests are listed at the end: the suite's time is kept under CI's bound (bench/RESULTS.md).
TEST_WORKERS ?= 2
test: setup sysdeps horovod
	DLRUN_PREBUILD_FOREIGN=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=40 tests

# The fast tier for development: every test that starts no real ranks, cluster, container, browser or
# TensorFlow run (the markers in pyproject.toml). `make test` and CI run everything.
check: setup
	$(BIN)/python -m pytest -q tests -m "not (mpi or slurm or horovod or tensorflow or browser or containers or slow)"

# The docs/ pages as a site in site/ (MkDocs, warnings as errors; tests/test_docs.py builds it too). The reference
# pages (docs/reference/) are generated from the code: refused when out of step (scripts/gen-reference.py writes them).
docs: setup
	$(BIN)/python scripts/gen-reference.py --check
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

bench: setup sysdeps
	$(BIN)/python bench/run.py

# The wheels bench/gpu.sh carries to the GPU machine (Python 3.12, no network there) into .whl/ (git-ignored).
gpu-wheels: setup
	$(BIN)/python scripts/gpu_wheels.py .whl

lint: setup
	$(BIN)/dlrun images render --check

clean:
	rm -rf $(VENV) .pytest_cache
