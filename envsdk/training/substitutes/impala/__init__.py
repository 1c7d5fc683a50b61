"""IMPALA and APPO: RLlib's learners, taking reward signals summed into their rewards."""
