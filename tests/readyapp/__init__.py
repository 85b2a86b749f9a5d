"""An app as projects write them (check W011's false alarms): its ``ready()`` imports its
definitions from a module not named ``workflows``, and a views module declares a @task."""
