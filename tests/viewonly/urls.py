"""The URLconf of the W011 tests: importing it imports the view module."""

from django.urls import path

from tests.viewonly import views

urlpatterns = [path("report/", views.report)]
