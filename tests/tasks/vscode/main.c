#include <stdio.h>

int main(void) {
  int answer = 42;
  printf("%d\n", answer);
  return undeclared_value;
}
