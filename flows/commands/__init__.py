"""The ``gradus`` subcommands, one module per group: ``stages`` (curation, the demo and the Prefect flow),
``scoring`` (estimate, export), ``training`` (train, model) and ``inspect`` (show, card, list). ``flows.cli`` builds
the parser and dispatches; each command imports its heavy packages inside, so ``gradus --help`` stays fast."""
