"""What a run produced, told: the summary train.py prints and the reward figures."""
