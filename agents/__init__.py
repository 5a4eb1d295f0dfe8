"""The agents app: everything LangChain and LangGraph, in four rooms.

observe/ watches a team's handoffs and writes their receipts (in Sidewisp's workers or in an app's
own process); host/ is the hosted runtime that drives registered graphs from Celery tasks; limits/
holds the admin's versioned middleware settings and builds each agent's stack from them; demo/ is
the demo team, one registered graph among others. models.py, admin.py, tasks.py and apps.py stay
at the app's root, where Django and Celery look for them.
"""
