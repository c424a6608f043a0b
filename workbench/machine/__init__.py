"""This machine and this process: what a run's provenance records (versions, files' hashes), the
machine's speed probed before and after a run, and the process settings for serving many streams."""
