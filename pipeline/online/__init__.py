"""Online training (train.online): the ensemble's ranks send samples to training ranks as runs complete.

job.py            the job: its ranks' roles, the config checks, the producers' farm, the summary
producer.py       a producer rank: each run's samples read (or streamed) and sent
stream.py         a simulator's ADIOS2 SST stream, read as it is written
arrivals.py       the fields as they arrive: their shapes and dtypes, checked
buffer.py         a training rank's buffer of samples (watermark, replay, eviction)
training_rank.py  a training rank's campaign: windows of what arrived, trained on
tables.py         online_runs.parquet and refused.csv
"""
