"""Evaluation: contenders × SLO grid × arrival orders, vanilla runners, figures, simulator."""
