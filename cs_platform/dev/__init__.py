"""The embedded default: emulator launcher, demo schema and workload, demo driver."""
