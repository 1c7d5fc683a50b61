"""The user's environment: base classes and hooks, the registry, gym compatibility, the checker,
curriculum, and the networks built for its spaces (model plugins and ``default_models``)."""
