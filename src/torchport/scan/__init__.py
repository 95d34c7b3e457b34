"""The scan engine: file discovery, parallel analysis, content-hash cache, configuration, reports."""
