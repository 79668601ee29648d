from django.shortcuts import render

from orders.models import ComplexityLevel, TaskType


def home(request):
    return render(
        request,
        "marketplace/home.html",
        {
            "levels": ComplexityLevel.objects.all(),
            "task_types": TaskType.objects.filter(active=True).select_related("default_complexity"),
        },
    )
