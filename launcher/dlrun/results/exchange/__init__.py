"""Runs in and out of a site: signed bundles (written, streamed within the site's limits, checked and
imported), exports, and tool logs imported as runs of a dlrun workload."""
