"""Online training (train.online): the ensemble's ranks send samples to training ranks as runs complete."""
