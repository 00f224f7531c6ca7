"""Files on disk: which are listed and why others are left out, their kinds, reading and
extracting them within the configured folders, grep, and noticing that they changed."""
