"""The settings of Scaler's processes, each declared once (docs/adr/0017-settings-as-one-model.md): model.py is how a
setting is declared and checked, common.py the settings every process has, scheduler.py the scheduler's, worker.py a
cluster of workers', cli.py the command-line flags made from them, legacy.py scaler 1.9.9's keywords that are taken
and ignored.

Importing this package imports none of them: the scheduler (Python 3.9 on PyPy) loads only what it uses.
"""
