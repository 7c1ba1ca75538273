"""Built-in estimators: ``additive`` latency, ``xgboost`` and ``lightgbm`` accuracy."""
