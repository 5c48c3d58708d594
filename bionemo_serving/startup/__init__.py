"""Before and around serving: settings, the launcher, the runtime each graph runs on this machine."""
