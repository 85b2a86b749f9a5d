from django.contrib import admin

from .models import CustomerNotice, Order, ParcelShipment, Payment, Shipment

admin.site.register(Order)
admin.site.register(Payment)
admin.site.register(Shipment)
admin.site.register(ParcelShipment)
admin.site.register(CustomerNotice)
