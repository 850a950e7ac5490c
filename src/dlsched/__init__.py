"""dlsched: a scheduler for deep-learning jobs on GPU clusters shared by many tenants.

The policy core (``dlsched.policies``) decides who runs where; the discrete-event simulator
(``dlsched.sim``) replays traces against a modelled cluster.
"""

__version__ = "0.1.0"
