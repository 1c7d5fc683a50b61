"""What the config's build adds to the MultiRLModule beside the policies, and the checks before it:
each policy's reward-signal models and cloning settings (``reward_signals``), POCA's group critics
(``poca``)."""
