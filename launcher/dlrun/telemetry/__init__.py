"""Telemetry of a run: the per-node sampler's place in a job (launch), its series (series) and the run's
summary (summary): utilisation, power, energy and energy per sample, throttling. The sampler itself is host
probing and lives in dlrun.probe (telemetry_sampler.py, telemetry_gpu.py: standard library, Python >= 3.6)."""
