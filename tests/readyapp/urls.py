"""The URLconf of the W011 tests: importing it imports the views module and its task."""

from django.urls import path

from tests.readyapp import views

urlpatterns = [path("receipt/", views.receipt)]
