"""Stand-ins for pieces of RLlib, one subpackage per concern as SB3 has one per algorithm:
the batched sampler (``sampling``), the PPO, DQN, SAC, IMPALA and APPO learners (what they share
for reward signals: ``reward_signals``) and SAC's module, and DQN/SAC transition replay
(``replay``).  Each is a row of :mod:`envsdk.substitutions`' table and turns off with it; each
keeps RLlib's classes' interfaces, so a user's plugin keeps working."""
