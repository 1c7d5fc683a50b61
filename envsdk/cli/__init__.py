"""The `envsdk` command and its subcommands (train, rollout, check, new, export, ...); train.py and
rollout.py call into it.  The layers below say what is wrong in their own words, with typed errors;
this one says which flag the user typed led there
(``errors.said_under``, around each call a flag leads to)."""
