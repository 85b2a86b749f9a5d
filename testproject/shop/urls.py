# Placeholder: the shop app's views and routes are added later.
urlpatterns = []
