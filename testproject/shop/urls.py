from django.urls import path

from . import views

app_name = "shop"
urlpatterns = [
    path("orders/", views.orders, name="orders"),
    path("orders/<str:number>/pay/", views.pay, name="pay"),
]
