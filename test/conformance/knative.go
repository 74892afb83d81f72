package main

// knativeFamilies replays ../shared/vectors/knative (issue 3).
var knativeFamilies []family
