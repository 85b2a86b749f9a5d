"""The public facade (``import django_workerflow as workerflow``): the verbs and their async
twins, the test harness, settings, system checks and tracing."""
