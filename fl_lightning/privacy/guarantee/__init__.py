"""The run's guarantee: the accountant callback that composes every round's events into the
logged and checkpointed ε (``accountant.py``), what the server-side code receives
(``server_view.py``), the ε against each observer (``observers.py``) and the privacy statement
written beside the run (``statement.py``). The top of the privacy layers: it may import
``privacy/accounting`` and ``privacy/distributed`` (the RDP of distributed rounds)."""
