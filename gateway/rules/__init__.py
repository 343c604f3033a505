"""``routing_rules.yaml``: its schema, and how a new version reaches every replica.

* ``schema``   the pydantic models and loader (unknown keys are errors)
* ``control``  :class:`RulesControl`: file watch, upload, rollback; the store's side of
  it is the :class:`RulesVersions` protocol, so the rules never import the store
"""

from gateway.rules.control import RulesControl, RulesVersions
from gateway.rules.schema import Rules, RulesError, load_rules, parse_rules

__all__ = ("Rules", "RulesControl", "RulesError", "RulesVersions", "load_rules", "parse_rules")
