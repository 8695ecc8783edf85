// Power telemetry from sysfs and procfs (SPEC 3.1). Filled in by the power issue.
