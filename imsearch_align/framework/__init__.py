"""The spine: interfaces, registry, metrics, evaluator."""
