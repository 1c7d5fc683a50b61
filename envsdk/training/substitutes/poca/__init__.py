"""MA-POCA (``run: POCA``): PPO's algorithm with a group critic per policy and the learner that
computes POCA's returns and advantages with it; RLlib has none, so it is listed among the
substitutions (``poca``) and refused in stock mode."""
